"""The model library: the models a user can talk with (catalogue), what the Hugging Face Hub
says of them and downloading them (hub_client, progress), and what is on this machine
already (local, listing)."""
