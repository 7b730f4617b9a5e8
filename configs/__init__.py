"""One ml_collections config file per paper row (`get_config()` only)."""
