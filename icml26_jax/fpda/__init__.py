"""FPDA (ICML 2026): Forensic Prompting with Dual-Action Policy Optimization for
vision-language forgery detection and localisation (reconstructed: no full text is public).

Modules: ``filters`` the fixed SRM and block-DCT forensic filters; ``prompts`` the fixed
prompt bank, closed vocabulary and the 15 routes; ``data`` ForgeBench-S (real bundled photos,
splice / copy-move / inpaint edits with exact masks, one shared post-processing chain) and
the real-data folder loader; ``model`` FPDANet (two-stream encoder, Forensic Prompting
Module with routing by masking and a reliability gate, mask decoder, shared refiner,
detection head) and the supervised loss; ``dapo`` the dual-action policy, rewards, group
advantages and PPO-clip; ``baselines`` B0-B4 and the noise-variance floor; ``metrics``
detection and localisation metrics; ``train`` / ``report`` / ``configs`` the experiment.
"""

from icml26_jax.fpda import baselines, configs, dapo, data, filters, metrics, model, prompts

__all__ = ["baselines", "configs", "dapo", "data", "filters", "metrics", "model", "prompts"]
