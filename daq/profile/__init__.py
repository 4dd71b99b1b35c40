"""Hardware profiles: the rig described as validated data."""

from daq.profile.loader import ProfileError, load_profile, parse_profile
from daq.profile.plant import plant_params
from daq.profile.schema import Channel, Converter, Joint, Plant, Profile

__all__ = [
    "Channel",
    "Converter",
    "Joint",
    "Plant",
    "Profile",
    "ProfileError",
    "load_profile",
    "parse_profile",
    "plant_params",
]
