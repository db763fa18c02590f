"""GPU support for an installed app: finding an NVIDIA GPU, fetching and checking torch's CUDA
build, and the dialog that offers it."""
