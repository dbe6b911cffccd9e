"""Evaluation of one run or control: the comparison protocol, offline linear/kNN probes,
robustness, hierarchy metrics, controls, and the steps a campaign's jobs run (``steps``)."""
