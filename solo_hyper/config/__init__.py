"""One config system for every command: ``defaults < YAML < dotted.key=value overrides``.

- ``errors``: ``ConfigError`` (every message says what to change) and closest-name hints;
- ``loading``: YAML files, overrides, merging and the one key checker every schema uses;
- ``devices``: the one device resolver (evaluation devices, Trainer accelerator/devices);
- ``pretrain``: the pretraining schema (``DEFAULTS``), its value checks and a method's section
  built from the method's declared ``ARGS`` and ``check_args``.
The linear and robust evaluation schemas (``evaluation/linear.py``, ``evaluation/robust.py``)
are checked by the same ``check_keys`` and devices by the same resolver.
"""

from solo_hyper.config.devices import check_trainer_devices, resolve_device
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
    SCHEDULERS,
    SMALL_IMAGE_SIZE,
    check_data_paths,
    complete,
    crop_counts,
    loggers,
    method_section,
    small_images,
    validate,
)

__all__ = [
    "DEFAULTS", "FREE_FORM", "LOGGERS", "OPTIMIZERS", "SCHEDULERS", "SMALL_IMAGE_SIZE",
    "ConfigError", "check_data_paths", "check_keys", "check_trainer_devices", "closest",
    "complete", "crop_counts", "load_config", "loggers", "merge", "method_section",
    "parse_override", "positive_int_or_none", "resolve_device", "set_dotted", "small_images",
    "validate",
]  # fmt: skip
