"""TGsF (ICML 2026): Taylor-Gaussians with quadratic motion and temporal opacity, TGs-Flow
supervision, and a feed-forward model, for novel view synthesis from monocular video.

In progress (issue 14): ``camera`` pinhole cameras and rays; ``gaussians`` Taylor-Gaussians;
``render`` the dense JAX rasteriser with rendered flow and 3D displacement; ``scenes`` the
analytic ray-cast ground truth (S1-S6) and pseudo-labels; ``losses`` photometric, SSIM,
depth, flow and lifted scene-flow losses; ``io`` the video-folder real-data path; ``fit``
keyframe initialisation and the per-field Adam. Still to come: the per-scene fit and experiments E1/E2, the
feed-forward model (E3), benchmark, colab.
"""
