"""This repository's Dagster code location; not part of the installed package."""
