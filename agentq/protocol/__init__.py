"""The pure protocol layer (filled in as modules land)."""
