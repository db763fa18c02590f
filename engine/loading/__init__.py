"""Getting a model into memory: where a name points (`locate`: a folder, a Hugging Face cache
snapshot or repository, "demo"), reading safetensors and weights-only `.pt` files with errors
that name the file (`safetensors_files`, `pt_files`), the model library (`library/`: what a
user can pick, the Hub, downloads, removal), the memory a model needs before it loads
(`memory_plan`), and loading through the family that claims a folder (`models`)."""
