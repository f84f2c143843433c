"""CoF-T2I (ICML 2026): video models as pure visual reasoners for text-to-image generation.

``scenes`` is the procedural compositional world with GenEval-schema prompts, held-out
combinations and the flat / refined renderers; ``evaluator`` is GenEval's scoring on a
programmatic, pixel-only detector (plus the refinement score); ``trajectories`` builds the
verified F1 -> F2 -> F3 chains; ``vae`` the frame autoencoder with independent per-frame
encoding (and the joint-encoder ablation); ``flow`` the flow-matching loss and CFG sampler;
``dit`` the video DiT; ``baselines`` the arms; ``adapter`` the interfaces for Wan2.1 and the
real GenEval detector; ``train.run`` is the experiment.
"""
