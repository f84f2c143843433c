"""CoF-T2I (ICML 2026): video models as pure visual reasoners for text-to-image generation.

Work in progress (issue 16): ``scenes`` is the procedural compositional world with
GenEval-schema prompts, held-out combinations and the flat / refined renderers; ``evaluator``
is GenEval's scoring on a programmatic, pixel-only detector; ``trajectories`` builds the
verified F1 -> F2 -> F3 chains and per-arm batches; ``vae`` is the frame autoencoder with
independent per-frame encoding; ``flow`` the flow-matching path, target, time shift and the
Euler integrator; ``dit`` the video DiT (joint attention over all frame tokens, frame
embeddings, caption cross-attention, adaLN-zero) and batched CFG. Next: the flow loss and
sampler on the DiT, the refinement score, arms, training, the experiment.
"""
