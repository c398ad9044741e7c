"""`penelope bench speed`: the embedded engine's raw speed, against any OpenAI server."""
