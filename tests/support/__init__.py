"""Helpers the tests share (plain functions and constants; fixtures live in tests/conftest.py)."""
