"""A model folder AIConfigurator can read: the model's config.json, written once into cockpit's
state folder under a name hashed from its text.

AIConfigurator reads a model from a Hugging Face id (which it would download) or from a local
folder holding config.json; cockpit hands it a local folder, so nothing goes to the network.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from cockpit.core.errors import CockpitError
from cockpit.core.model import ModelArch
from cockpit.store.modelfiles import MAX_CONFIG_BYTES, parse_json, with_separate_quantization
from cockpit.store.paths import private_dir, state_dir
from cockpit.store.textfile import read_text


def models_dir() -> Path:
    return state_dir() / "kernels" / "models"


# Folders written in this process, by (state folder, config path, its mtime and size): a plan
# asks for every layout, and the config need not be read and hashed again for each.
_written: dict[tuple[Path, str, int, int], Path] = {}


def model_folder(model: ModelArch) -> Path | str:
    """The folder holding ``model``'s config.json (its quantization merged in, as cockpit read
    it), or why there is none: a model parsed from no file on disk has no config to hand over."""
    source = Path(model.source)
    try:
        seen = source.stat()
    except OSError:
        seen = None
    if seen is None or not source.is_file():
        return f"the model's config.json ({model.source}) is not a file on disk"
    key = (models_dir(), str(source), seen.st_mtime_ns, seen.st_size)
    if key in _written and (_written[key] / "config.json").is_file():
        return _written[key]
    try:
        text = read_text(
            source, limit=MAX_CONFIG_BYTES, what=str(source), fix="point --model at its config.json"
        )
        config = parse_json(text, source)
        if not isinstance(config, dict):
            return f"{source} holds no JSON object"
        config = with_separate_quantization(config, source)
        body = json.dumps(config, indent=1, sort_keys=True)
        folder = models_dir() / hashlib.sha256(body.encode()).hexdigest()[:16]
        target = folder / "config.json"
        if not target.is_file():
            private_dir(folder)
            partial = folder / f".config.json.{os.getpid()}"
            # Owner-only, as everything cockpit keeps: a config names the model a person serves.
            fd = os.open(partial, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(body)
            os.replace(partial, target)
    except CockpitError as err:
        return str(err)
    except OSError as err:
        return f"cannot write the model's config.json for AIConfigurator: {err.strerror}"
    _written[key] = folder
    return folder
