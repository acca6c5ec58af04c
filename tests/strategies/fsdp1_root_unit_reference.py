"""What torch's FSDP1 keeps gathered at the end of forward, on the CPU.

Two gloo ranks (forked, a FileStore rendezvous: no port) wrap a small
transformers Llama as accelerate and the Trainer do under FULL_SHARD: one
unit per decoder layer and the root for the rest, and under LoRA PEFT's
fsdp_auto_wrap_policy (each trainable leaf a unit of its own). At the end
of the root's forward the script records, for every unit, the bytes of its
gathered (unsharded) parameters still held, and writes them as JSON for
fsdp1_root_unit_test.cpp, which compares the root's with the memory
model's RuntimeQuirks::root_unit_gathered.

Then, under LoRA with checkpointing (the Trainer's enable_input_require_grads
for PEFT), it records how many of the layers' recomputed inputs are alive,
with their gradients, when backward reaches the embedding's output: the
memory model's RuntimeQuirks::held_checkpoints. Three placements:
transformers 4.x's (its model loop checkpoints each layer's call, the FSDP
unit's pre-forward inside: torch's checkpoint around the unit here), reentrant
and not, and the venv's transformers' own (a layer that checkpoints itself,
inside its unit).

  fsdp1_root_unit_reference.py --out F
"""

import argparse
import functools
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HIDDEN, INTERMEDIATE, LAYERS, HEADS, VOCAB, TOKENS = 64, 128, 3, 4, 1000, 16
CASES = ("untied", "tied", "lora")


def build(case):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=HEADS, vocab_size=VOCAB,
                         tie_word_embeddings=case == "tied")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    if case != "lora":
        return model, None
    from peft import LoraConfig, get_peft_model
    from peft.utils.other import fsdp_auto_wrap_policy

    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    return model, fsdp_auto_wrap_policy(model)


def gathered(units):
    """Each unit's class and the bytes its gathered parameters hold now."""
    rows = []
    for unit in units:
        handle = unit._handle
        if handle is None:
            continue
        flat = handle.flat_param
        held = flat._full_param_padded.untyped_storage().size() if hasattr(flat, "_full_param_padded") else 0
        rows.append({"unit": type(unit.module).__name__, "is_root": unit._is_root, "bytes": held})
    return rows


class CheckpointAround(torch.nn.Module):
    """transformers 4.x's loop: checkpoint(decoder_layer.__call__, hidden, ...)
    with the FSDP unit as the decoder layer."""

    def __init__(self, unit, reentrant):
        super().__init__()
        self.unit, self.reentrant = unit, reentrant

    def forward(self, hidden_states, **kwargs):
        import torch.utils.checkpoint as checkpoint
        return checkpoint.checkpoint(functools.partial(self.unit.__call__, **kwargs), hidden_states,
                                     use_reentrant=self.reentrant)


def held_inputs(placement, reentrant):
    """The recomputed layer inputs alive, and their bytes with their
    gradients', when backward reaches the embedding's output."""
    import weakref

    import torch.utils.checkpoint as checkpoint
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy

    model, policy = build("lora")
    if placement == "own":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    model.enable_input_require_grads()  # as the Trainer does for PEFT under checkpointing
    wrapped = FSDP(model, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                   device_id=torch.device("cpu"), use_orig_params=True)
    if placement == "around":
        layers = model.get_base_model().model.layers
        for i in range(len(layers)):
            layers[i] = CheckpointAround(layers[i], reentrant)
    inputs = []
    original = checkpoint.detach_variable

    def recording(values):
        out = original(values)
        inputs.extend(weakref.ref(t) for t in out if isinstance(t, torch.Tensor))
        return out

    seen = {}

    def at_embedding(grad):
        alive = [t for t in (r() for r in inputs) if t is not None]
        seen["alive"] = len(alive)
        seen["with_grad"] = sum(t.grad is not None for t in alive)
        seen["bytes"] = sum(t.untyped_storage().nbytes() + (t.grad.untyped_storage().nbytes() if t.grad is not None
                                                             else 0) for t in alive)

    def on_embedding(module, args, output):
        if output.requires_grad:
            output.register_hook(at_embedding)  # returns None: the output stays

    model.get_input_embeddings().register_forward_hook(on_embedding)
    checkpoint.detach_variable = recording
    try:
        ids = torch.randint(0, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(1))
        wrapped.train()
        wrapped(input_ids=ids, labels=ids).loss.backward()
    finally:
        checkpoint.detach_variable = original
    return {"recomputed": len(inputs), **seen}


def rank_main(rank, world, store_path, out):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=world)
    results = {}
    for case in CASES:
        model, policy = build(case)
        if policy is None:
            policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
        wrapped = FSDP(model, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                       device_id=torch.device("cpu"), use_orig_params=False)
        units = FSDP.fsdp_modules(wrapped)
        seen = {}

        def end_of_forward(module, inputs, output):
            seen["end"] = gathered(units)  # returns None: the output stays

        wrapped.register_forward_hook(end_of_forward)
        ids = torch.randint(0, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(1))
        loss = wrapped(input_ids=ids, labels=ids).loss
        loss.backward()
        results[case] = {"end_of_forward": seen["end"], "after_backward": gathered(units)}
    for name, placement, reentrant in (("around_units_reentrant", "around", True),
                                       ("around_units_non_reentrant", "around", False),
                                       ("transformers", "own", True)):
        results[name] = held_inputs(placement, reentrant)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"torch": torch.__version__, "world": world, "hidden": HIDDEN, "intermediate": INTERMEDIATE,
                       "layers": LAYERS, "heads": HEADS, "vocab": VOCAB, "tokens": TOKENS, "cases": results}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # Forked: the modules this process imported are not imported again.
        mp.start_processes(rank_main, args=(2, os.path.join(tmp, "store"), args.out), nprocs=2, join=True,
                           start_method="fork")


if __name__ == "__main__":
    main()
