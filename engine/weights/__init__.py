"""Weight formats beyond the float a checkpoint holds: int8 rows with a scale each, in the
official q8 layout (`int8`); our int4 layout, two weights a byte with a bf16 scale per 64
inputs (`int4`); int4 copies quantized once and kept beside the Hugging Face cache (`int4_kept`
makes and reads them, `int4_copies` finds them), each checked against its checksums
(`checksums`); and writing a checkpoint in int8 or int4 (`export`)."""
