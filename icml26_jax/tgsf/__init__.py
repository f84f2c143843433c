"""TGsF (ICML 2026): Taylor-Gaussians with quadratic motion and temporal opacity, TGs-Flow
supervision, and a feed-forward model, for novel view synthesis from monocular video.

Modules: ``camera`` pinhole cameras and rays; ``gaussians`` Taylor-Gaussians; ``render`` the
dense JAX rasteriser with rendered flow and 3D displacement; ``scenes`` the analytic ray-cast
ground truth (S1-S6) and pseudo-labels; ``losses`` photometric, SSIM, depth, flow and lifted
scene-flow losses; ``io`` the video-folder real-data path; ``data`` rigs, time grids and
training views; ``fit`` per-scene fitting (arms x seeds vmapped); ``evaluate`` held-out
metrics; ``model`` FF-TGsF and the offset-head baseline; ``ff`` the feed-forward experiment
(E3); ``baselines`` where every spec baseline lives; ``train`` / ``report`` / ``configs``
the experiments.
"""
