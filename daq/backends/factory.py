"""Pick and build the backend a profile asks for. Vendor packages are imported here, lazily,
so that `import daq` works on a machine without the NI driver or a serial port."""

from __future__ import annotations

import importlib

from daq.backends.base import Backend, BackendError
from daq.profile.schema import Channel, DeviceName, Profile

_CLASSES: dict[str, tuple[str, str]] = {
    "sim": ("daq.backends.sim", "SimBackend"),
    "ni": ("daq.backends.ni", "NiBackend"),
    "serial": ("daq.backends.serial_resolver", "SerialResolverBackend"),
}


def make_device_backend(
    profile: Profile, device: DeviceName, inputs: list[Channel], outputs: list[Channel]
) -> Backend:
    """One device's backend serving exactly these channels, in this order."""
    module_name, cls_name = _CLASSES[device]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(f"backend '{device}' is not available on this machine: {exc}") from None
    cls = getattr(module, cls_name)
    if device == "sim":
        cls = module.sim_backend_class(profile)  # the chain's simulator for a [chain] profile
    backend: Backend = cls(profile, inputs, outputs)
    return backend


def make_backend(profile: Profile) -> Backend:
    """The backend for the whole profile (inputs and outputs in profile order)."""
    if profile.backend.kind == "composite":
        try:
            from daq.backends.composite import CompositeBackend
        except ImportError as exc:
            raise BackendError(f"composite backend not available: {exc}") from None
        backend: Backend = CompositeBackend(profile)
        return backend
    return make_device_backend(profile, profile.backend.kind, profile.inputs, profile.outputs)
