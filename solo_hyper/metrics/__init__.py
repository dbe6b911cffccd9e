"""Pure metrics on embeddings (torch only): weighted kNN, hierarchy (delta-hyperbolicity, class
norms) and the hyperbolic MDS disk map; used by the adapters and by evaluation alike."""
