"""``python -m solo_hyper.launch.worker JOB.pkl``: one job of ``--jobs``, in its own process.

The intra-op threads come from ``SOLO_HYPER_THREADS`` (the pool's share of the cores); Ctrl-C and
SIGTERM stop it after its step's checkpoint (exit 130 / 143), an error exits 1 with its
traceback in the job's log.
"""

from __future__ import annotations

import os
import sys
import traceback


def main(argv: list[str]) -> int:
    from solo_hyper.run.stop import Interrupted, stop_on_signals

    with stop_on_signals():
        try:
            import torch

            threads = os.environ.get("SOLO_HYPER_THREADS")
            if threads:
                torch.set_num_threads(int(threads))
            from solo_hyper.launch.jobs import read_job, run_job

            job = read_job(argv[0])
            row = run_job(job)
            print(f"[jobs] {job.name} done: {row.get('run_dir')}", flush=True)
            return 0
        except Interrupted as err:
            print(f"[jobs] {err.signal_name}: {err}", flush=True)
            return err.exit_code
        except Exception:
            traceback.print_exc()
            return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
