"""The Redis state store: key layout, atomic Lua steps, and the `StateStore` facade."""
