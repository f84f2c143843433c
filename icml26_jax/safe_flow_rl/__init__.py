"""SafeFlowRL (ICML 2026): geometric control of OOD shift in safe offline RL.

``envs`` PointRobotHazard (gymnax-style, pure JAX) with the analytic avoidable set; ``data``
the offline dataset (through the ``offline_episodes`` TFDS builder), DSRL loader and
normalised metrics; ``critics`` FISOR's HJ safety, IQL reward and cost critics; ``weights`` the
feasibility weights; ``model`` the conditional RealNVP, MLPs and refiner heads; ``prior`` the
weighted flow-prior loss; ``refiner`` the radially clipped ordered latent refiner;
``policies`` candidate selection and our policy; ``baselines`` BC-All, BC-Safe, BC-Lag,
FISOR-lite, prior-only; ``bounds`` the P1 / P2 geometry; ``stages`` the resumable,
seed-vmapped training stages; ``evaluate`` rollouts and metrics; ``train`` / ``report`` the
experiment, claims and figures. See README.md.
"""
