"""TGsF (ICML 2026): Taylor-Gaussians with quadratic motion and temporal opacity, TGs-Flow
supervision, and a feed-forward model, for novel view synthesis from monocular video.

In progress (issue 14): ``camera`` pinhole cameras and rays.
"""
