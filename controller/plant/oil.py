"""The oil's temperature laws as a rig engineer knows them from the oil's datasheet: viscosity
(Walther, ASTM D341) and the liquid bulk modulus (Tait's exponential). The identification
models use them to refer the temperature-dependent parameters to one reference temperature
(estimator/models_lin.py); the simulator has its own copy of the true laws (PlantEffects).

Why a reference temperature: a cold start warms the oil by several kelvin in an identification
run, and viscous friction and laminar leakage follow the viscosity (×2.5 between 22 and 40 °C
for an ISO VG46 oil), the bulk modulus 0.6 %/K. Parameters "at the run's temperature" are
neither comparable between runs nor constant within one; ISO VG grades are stated at 40 °C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: ISO 3448 / ASTM D341's two datasheet temperatures (°C).
DATASHEET_LOW_C = 40.0
DATASHEET_HIGH_C = 100.0


def walther(temp_c: np.ndarray | float, a: float, b: float) -> np.ndarray:
    """Kinematic viscosity in cSt (ASTM D341): log₁₀ log₁₀(ν + 0.7) = A − B log₁₀ T[K]."""
    t = np.asarray(temp_c, dtype=float)
    return np.asarray(10.0 ** (10.0 ** (a - b * np.log10(t + 273.15))) - 0.7)


def walther_viscosity(temp_c: float, a: float, b: float) -> float:
    """`walther` at one temperature, as a float."""
    return float(walther(temp_c, a, b))


def _loglog(nu_cst: float) -> float:
    return math.log10(math.log10(nu_cst + 0.7))


@dataclass(frozen=True)
class OilLaw:
    """ν(T) by Walther's law log₁₀ log₁₀(ν + 0.7) = A − B log₁₀ T[K]; b(T) = b_ref e^(−k (T −
    T_ref)). Parameters referred to `reference_c` are the ones these laws scale."""

    walther_a: float
    walther_b: float
    bulk_per_k: float  # k, 1/K
    reference_c: float = DATASHEET_LOW_C

    @classmethod
    def from_datasheet(
        cls,
        viscosity_40c_cst: float,
        viscosity_100c_cst: float,
        bulk_per_k: float,
        reference_c: float = DATASHEET_LOW_C,
    ) -> OilLaw:
        """Walther's A, B through the datasheet's two kinematic viscosities (cSt at 40 and
        100 °C, ISO 3104), ν(40) > ν(100) > 0."""
        if not viscosity_40c_cst > viscosity_100c_cst > 0.0:
            raise ValueError(
                f"viscosity_40c_cst ({viscosity_40c_cst}) must exceed viscosity_100c_cst "
                f"({viscosity_100c_cst}) > 0 (cSt): oil thins as it warms"
            )
        x1 = math.log10(DATASHEET_LOW_C + 273.15)
        x2 = math.log10(DATASHEET_HIGH_C + 273.15)
        y1, y2 = _loglog(viscosity_40c_cst), _loglog(viscosity_100c_cst)
        b = (y1 - y2) / (x2 - x1)
        return cls(
            walther_a=y1 + b * x1, walther_b=b, bulk_per_k=bulk_per_k, reference_c=reference_c
        )

    def viscosity_cst(self, temp_c: np.ndarray | float) -> np.ndarray:
        return walther(temp_c, self.walther_a, self.walther_b)

    def viscosity_ratio(self, temp_c: np.ndarray | float) -> np.ndarray:
        """ν(T)/ν(T_ref): viscous friction scales with it, laminar leakage with its inverse."""
        ref = walther_viscosity(self.reference_c, self.walther_a, self.walther_b)
        return self.viscosity_cst(temp_c) / ref

    def bulk_ratio(self, temp_c: np.ndarray | float) -> np.ndarray:
        """b(T)/b(T_ref) of the liquid (Tait: −k per kelvin)."""
        return np.exp(-self.bulk_per_k * (np.asarray(temp_c, dtype=float) - self.reference_c))
