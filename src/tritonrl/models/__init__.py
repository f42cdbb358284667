"""Models: what training, evaluation and distillation share about a model.

`load` (a hub id, a saved directory, a GGUF file or a named GGUF; `convert_gguf`),
`tiny` (the from-scratch tiny model of the offline pipeline), `sampling` (the
`generate` arguments every sampler uses) and `adapters` (a moved run's LoRA adapters
pointed at its base). Nothing here trains or evaluates."""
