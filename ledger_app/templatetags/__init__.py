"""Template tags for the admin's pages."""
