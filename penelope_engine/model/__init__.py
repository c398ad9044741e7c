"""The model room: paged Qwen3 / Llama decoders, their loaders and tokenizers (torch).

Modules:
    attention         Explicit attention metadata for one forward pass over a flat batch
    backends          `ATTENTION_BACKENDS`: how a step's attention runs, by name (no torch
                      here; configs check names)
    causal_attention  Attention of a prefill chunk that starts its sequence: no mask at all
    cpu_kernels       The CPU's paged decode kernel (`kernels/paged_decode.c`): built from C
                      at first use, called through ctypes
    decode_graphs     Decode steps over fixed buffers, replayed as CUDA graphs: one per
                      batch-size bucket
    decoder           Paged-KV decoder for the Llama and Qwen3 architectures
    flex_paged        Attention straight over the pool through the page table, by
                      FlexAttention
    gemm              The float product of a linear layer: oneDNN over a pre-packed copy
                      (row counts bucketed), bf16 prefill widened where the CPU emulates it
    gguf_loader       Load a llama.cpp GGUF file (Llama or Qwen3) by converting it once to a
                      checkpoint directory
    gguf_tokenizer    Byte-level BPE tokenizer rebuilt from GGUF metadata
                      (``tokenizer.ggml.*``)
    hf_checkpoint     Hugging Face checkpoint directories: ``config.json`` +
                      ``*.safetensors`` (+ tokenizer files)
    layers            Building blocks with uninitialized weights (filled by a loader or
                      `tiny.init_random`)
    paged_attention   Attention of a flat batch over paged KV
    registry          Models by name: ``tiny-qwen3``, ``tiny-llama``, ``smollm2-135m``, or a
                      checkpoint directory
    run_attention     Attention of one sequence's queries over its cached keys, a piece of a
                      run at a time
    rope              Rotary position embedding with the Hugging Face `rotate_half`
                      convention
    tiny              Tiny seeded random-weight models for tests and CPU benchmarks
    weight_formats    Weight-only int8 / int4 linear layers: decode rows read the packed
                      copy, prefill the float values it stands for (`WEIGHT_FORMATS`)
    widen             Multi-row bf16 / fp16 products on a CPU without bf16 / fp16
                      arithmetic, in float32
"""
