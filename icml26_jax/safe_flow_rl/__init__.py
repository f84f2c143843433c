"""SafeFlowRL (ICML 2026): geometric control of OOD shift in safe offline RL.

In progress (issue 13): ``envs`` PointRobotHazard (gymnax-style, pure JAX) with the analytic
avoidable set; ``data`` the offline dataset, DSRL loader and normalised metrics; ``critics``
FISOR's HJ safety critics and IQL reward critics; ``weights`` the feasibility weights;
``model`` the conditional RealNVP, MLPs and refiner heads; ``prior`` the weighted flow-prior
loss; ``refiner`` the radially clipped ordered latent refiner; ``policies`` candidate
selection; ``bounds`` the P1 / P2 geometry; ``stages`` the resumable, seed-vmapped critic stage
and the feasible-set IoU. Still to come: the flow / refiner / baseline / evaluation stages and
the experiment.
"""
