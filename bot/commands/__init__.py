"""Chat commands: parsing (pure) and the router that answers them."""
