"""curves.png says what it draws (issue 33): the title names the band and the error bars only
where they are drawn, a panel of one logged step has that integer step as its only tick, and
the legends sit below the axes, so no method's point is hidden."""

from __future__ import annotations

import csv
from pathlib import Path

from solo_hyper.evaluation import plots


def fake_run(root: Path, name: str, seed_offset: float) -> Path:
    """A run's CSV log: a loss every step 0..9, the online probes once, at step 9."""
    folder = root / name / "logs" / "version_0"
    folder.mkdir(parents=True)
    with open(folder / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["epoch", "step", "train_nce_loss_step", "val_acc1", "val_knn_acc1"])
        for step in range(10):
            writer.writerow([0, step, 5 - 0.1 * step + seed_offset, "", ""])
        writer.writerow([0, 9, "", 40 + seed_offset, 0.3 + seed_offset / 100])
    return root / name


def drawn_figure(tmp_path, monkeypatch, groups):
    figures = []
    monkeypatch.setattr(plots.plt, "close", lambda fig=None: figures.append(fig))
    result = plots.training_curves(groups, tmp_path / "curves.png", knn_scale=100.0)
    return result, figures[-1]


def test_curves_title_ticks_and_legends_say_what_is_drawn(tmp_path, monkeypatch):
    groups = {
        "hcl": [fake_run(tmp_path, "hcl-s0", 0.0), fake_run(tmp_path, "hcl-s1", 1.0)],
        "simclr": [fake_run(tmp_path, "simclr-s0", 0.5)],
    }
    (path, drawn), fig = drawn_figure(tmp_path, monkeypatch, groups)
    assert path.is_file()
    title = fig._suptitle.get_text()
    assert "shaded band" in title and "error bars" in title  # the loss: band; one point: bars
    assert all(series == ["hcl", "simclr"] for series in drawn.values())  # every method's point
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert all(float(t).is_integer() for t in ticks), ticks
        legend = ax.get_legend()
        assert legend.get_window_extent().y1 <= ax.get_window_extent().y0  # below the axes
    single = [ax for ax in fig.axes if "online" in ax.get_title()]
    assert len(single) == 2 and all(list(ax.get_xticks()) == [9] for ax in single)


def test_one_seed_per_method_draws_no_band_and_the_title_says_so(tmp_path, monkeypatch):
    groups = {"hcl": [fake_run(tmp_path, "hcl-s0", 0.0)]}
    _, fig = drawn_figure(tmp_path, monkeypatch, groups)
    title = fig._suptitle.get_text()
    assert "band" not in title and "error bars" not in title and "one run per method" in title


def test_two_methods_losses_never_share_an_axis(tmp_path, monkeypatch):
    """SimCLR's cosine InfoNCE and HCL's Poincare InfoNCE log one name, train_nce_loss, on other
    scales: a panel each (titled with the method and geometry); the online probes stay shared."""
    import yaml

    runs = {"hcl": fake_run(tmp_path, "hcl-s0", 0.0), "simclr": fake_run(tmp_path, "simclr-s0", 0.5),
            "hcl-lorentz": fake_run(tmp_path, "hcl-lorentz-s0", 0.2)}  # fmt: skip
    configs = {"hcl": {"method": "hcl", "method_kwargs": {"geometry": "poincare"}},
               "simclr": {"method": "simclr", "method_kwargs": {}},
               "hcl-lorentz": {"method": "hcl", "method_kwargs": {"geometry": "lorentz"}}}  # fmt: skip
    for label, run in runs.items():
        (run / "config.yaml").write_text(yaml.safe_dump(configs[label]))
    (_, drawn), fig = drawn_figure(tmp_path, monkeypatch, {k: [v] for k, v in runs.items()})
    losses = {title: series for title, series in drawn.items() if "loss" in title}
    assert losses == {"train nce loss: hcl, lorentz": ["hcl-lorentz"],
                      "train nce loss: hcl, poincare": ["hcl"], "train nce loss: simclr": ["simclr"]}
    assert drawn["online linear top-1 (%)"] == ["hcl", "simclr", "hcl-lorentz"]
    # one objective (the same method and geometry over its seeds): one panel, as before
    second = fake_run(tmp_path / "more", "hcl-s1", 1.0)
    (second / "config.yaml").write_text(yaml.safe_dump(configs["hcl"]))
    (_, drawn), _ = drawn_figure(tmp_path, monkeypatch, {"hcl": [runs["hcl"], second]})
    assert [t for t in drawn if "loss" in t] == ["train nce loss"]


def test_an_accuracy_axis_spans_at_least_ten_points_and_stays_in_0_100():
    """comparison.png's panels: 82.5 and 83.4 (two methods within noise) are drawn on an axis
    of at least MIN_SPAN points, not one that makes 0.9 points look like the whole range."""
    low, high = plots.accuracy_limits([82.5, 83.4])
    assert high - low >= plots.MIN_SPAN and low < 82.5 and high > 83.4
    low, high = plots.accuracy_limits([40.0, 85.0])  # a wider spread: every value, a margin
    assert low < 40.0 and high > 85.0 and high - low < 55
    assert plots.accuracy_limits([99.0, 99.5])[1] <= 100.0 and plots.accuracy_limits([0.5, 1.0])[0] >= 0.0
