"""FML (ICML 2026), reconstructed from the abstract: federated manifold learning under domain
heterogeneity with structural knowledge transfer. See ``README.md``."""
