"""Campaigns: many runs trained, evaluated with one protocol beside their controls, and
tabulated (``compare``, ``sweep``; ``reproduce`` builds its paper tables on this layer).

Every campaign goes one path: plan (every run and control checked before any work) -> dispatch
(each unfinished run, and each control not yet evaluated, is a job: ``launch``) -> collect (each
run's and control's numbers read from its directory, nothing computed) -> report. ``runs`` and
``controls`` make the jobs and read their results.

The layers, from the top (each imports only the layers below it):

    cli                  the commands
    reproduce            the paper tables
    campaigns            compare, sweep, and the jobs and results of runs and controls
    launch               jobs and where they run (this process, worker processes, a cluster)
    evaluation           one run's or control's numbers, and the steps a job runs
    run                  one run's training
    config, ...          configs, methods, objectives, algorithms
"""
