"""Adapters to the stores teams already run (mem0): pull their memories in, push a night's decisions back."""
