"""The datasheet profiles: one TOML file per device in the repo's profiles/, its schema and use.

Adding a device's datasheet is one file, profiles/<id>.toml, every figure with its source;
`schema.py` refuses a figure without one, `catalog.py` reads and looks the files up, `match.py`
recognises a probed device (PCI id, name, memory; a chip's configuration), and `devices.py`
turns a profile into a `Device` (planned from the datasheet, or a probed one's gaps filled).
"""

from hwadvisor.profiles.catalog import (
    MAX_ID_CHARS,
    by_class,
    get,
    ids,
    load_all,
    parse_profile,
    suggest,
    variant_ids,
)
from hwadvisor.profiles.devices import (
    APP_MEMORY_RULES,
    AppMemoryRule,
    app_memory_limit_bytes,
    app_memory_limit_for,
    device_from_profile,
    enrich_device,
    enrich_devices,
    low_precision,
    mobile_app_memory_limit_bytes,
    mobile_os_of,
    npu_info,
    restore_facts,
    soc_part,
    unknown_device_hint,
    with_family,
)
from hwadvisor.profiles.match import (
    MEMORY_MATCH_BAND,
    VARIANT_MEMORY_BAND,
    VariantChoice,
    choose_variant,
    match,
    memory_fits,
    parse_pci_id,
    resolve_variant,
)
from hwadvisor.profiles.schema import (
    FAMILIES,
    GIB,
    PEAK_FORMATS,
    SOURCE_GROUPS,
    Profile,
    ProfileInterconnect,
    ProfileMatch,
    ProfileMobile,
    ProfileNpu,
    ProfileSystem,
    ProfileVariant,
)

__all__ = [
    "APP_MEMORY_RULES", "FAMILIES", "GIB", "MAX_ID_CHARS", "MEMORY_MATCH_BAND", "PEAK_FORMATS",
    "SOURCE_GROUPS", "VARIANT_MEMORY_BAND", "AppMemoryRule", "Profile", "ProfileInterconnect",
    "ProfileMatch", "ProfileMobile", "ProfileNpu", "ProfileSystem", "ProfileVariant",
    "VariantChoice", "app_memory_limit_bytes", "app_memory_limit_for", "by_class",
    "choose_variant", "device_from_profile", "enrich_device", "enrich_devices", "get", "ids",
    "load_all", "low_precision", "match", "memory_fits", "mobile_app_memory_limit_bytes",
    "mobile_os_of", "npu_info", "parse_pci_id", "parse_profile", "resolve_variant",
    "restore_facts", "soc_part", "suggest", "unknown_device_hint", "variant_ids", "with_family",
]
