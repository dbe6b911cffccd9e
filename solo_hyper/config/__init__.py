"""One config system for every command: ``defaults < YAML < dotted.key=value overrides``.

- ``errors``: ``ConfigError`` (every message says what to change) and closest-name hints;
- ``loading``: YAML files, overrides, merging and the one key checker every schema uses;
- ``devices``: the one device resolver (evaluation devices, Trainer accelerator/devices);
- ``schema``: ``Schema`` (defaults tree, free-form paths, value check; ``load`` is every command's
  entry) and ``method_schema`` (a method's section: its objective's ``Args`` dataclass gives the
  keys and defaults; the values are checked when ``run.train.prepare`` makes the ``Args``);
- ``pretrain``: the pretraining schema (``PRETRAIN`` over ``DEFAULTS``), its completion
  (``complete``) and its checks (``validate``, which changes nothing);
- ``robust``: the robust evaluation's schema (``ROBUST``) and the parsing of its values (radii,
  attacks, schedules, diagnostics).
The linear evaluation's schema (``evaluation.linear.LINEAR``) is a ``Schema`` too; both resolve
devices with the same resolver.
"""

from solo_hyper.config.devices import check_trainer_devices, resolve_device, training_processes
from solo_hyper.config.errors import ConfigError, closest
from solo_hyper.config.loading import (
    check_keys,
    load_config,
    merge,
    parse_override,
    positive_int_or_none,
    set_dotted,
)
from solo_hyper.config.pretrain import (
    DEFAULTS,
    FREE_FORM,
    LOGGERS,
    OPTIMIZERS,
    PRETRAIN,
    SCHEDULERS,
    SMALL_IMAGE_SIZE,
    check_data_paths,
    complete,
    crop_counts,
    crop_entries,
    loggers,
    method_section,
    small_images,
    validate,
)
from solo_hyper.config.schema import Schema, method_schema

__all__ = [
    "DEFAULTS", "FREE_FORM", "PRETRAIN", "Schema", "method_schema", "LOGGERS", "OPTIMIZERS", "SCHEDULERS", "SMALL_IMAGE_SIZE",
    "ConfigError", "check_data_paths", "check_keys", "check_trainer_devices", "closest",
    "training_processes",
    "complete", "crop_counts", "crop_entries", "load_config", "loggers", "merge", "method_section",
    "parse_override", "positive_int_or_none", "resolve_device", "set_dotted", "small_images",
    "validate",
]  # fmt: skip
