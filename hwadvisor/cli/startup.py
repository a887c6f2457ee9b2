"""Start-up shortcuts of the `hwadvisor` command, whose start-up time is a target.

`hwadvisor/__main__.py` turns pydantic's plugins off (PYDANTIC_DISABLE_PLUGINS=__all__, unless
the user set the variable): hwadvisor uses none. pydantic still imports its plugin loader when
the first model is built, and the loader imports importlib.metadata (with email, zipfile ...,
~12 ms of a ~200 ms probe) only to be told there are no plugins. With plugins off, a stand-in
for the loader gives that answer without the import; any other name is served by the real
loader, loaded on first use, so a pydantic that needs more of it keeps working.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

PLUGIN_LOADER = "pydantic.plugin._loader"
PLUGINS_OFF = ("__all__", "1", "true")  # the values pydantic's get_plugins() treats as off


def skip_plugin_discovery() -> None:
    """Stand in for pydantic's plugin loader while PYDANTIC_DISABLE_PLUGINS turns plugins off."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in PLUGINS_OFF:
        return
    if PLUGIN_LOADER in sys.modules:
        return
    import pydantic.plugin  # the package is imported for the first model anyway (~1 ms)

    stand_in = types.ModuleType(PLUGIN_LOADER, "hwadvisor's stand-in: plugins are off")
    setattr(stand_in, "get_plugins", _no_plugins)  # noqa: B010 - a module's attributes
    setattr(stand_in, "__getattr__", _real_attribute)  # noqa: B010
    sys.modules[PLUGIN_LOADER] = stand_in
    setattr(pydantic.plugin, "_loader", stand_in)  # noqa: B010 - as an import would


def _no_plugins() -> tuple[()]:
    return ()


def _real_attribute(name: str) -> Any:
    """Serve any other name of the loader from the real module (loaded here, once)."""
    if name.startswith("__"):  # the import system asks for __path__ and the like: not ours
        raise AttributeError(name)
    real = sys.modules.get(PLUGIN_LOADER + "_real")
    if real is None:
        import pydantic.plugin

        source = Path(pydantic.plugin.__file__).with_name("_loader.py")
        spec = importlib.util.spec_from_file_location(PLUGIN_LOADER + "_real", source)
        if spec is None or spec.loader is None:
            raise AttributeError(name)
        real = importlib.util.module_from_spec(spec)
        real.__package__ = "pydantic.plugin"
        sys.modules[spec.name] = real
        spec.loader.exec_module(real)
    return getattr(real, name)
