"""Index maps between the loop's channel-ordered arrays and the controller's joint-ordered ones.

Inputs: each field of `controller.feedback.Feedback` (q, p_cap, p_rod, spool, piston) takes, per
joint, the scaled value of the channel with the matching role. Outputs: a runner writes one valve
voltage per joint; the backend wants one per output channel in profile order.

All index arrays are built once; `fill()` and `to_channels()` only copy.
"""

from __future__ import annotations

import numpy as np

from controller.feedback import Feedback
from daq.profile.schema import Profile

#: Feedback field → channel role.
FIELDS: tuple[tuple[str, str], ...] = (
    ("q", "resolver"),
    ("p_cap", "pressure_cap"),
    ("p_rod", "pressure_rod"),
    ("spool", "lvdt"),
    ("piston", "potentiometer"),
)


class FeedbackMap:
    def __init__(self, profile: Profile) -> None:
        inputs = profile.inputs
        index = {c.name: i for i, c in enumerate(inputs)}
        joints = [j.name for j in profile.joints]
        self.n_joints = len(joints)
        # Fields every joint has: one np.take. Fields some joints lack: element pairs, the
        # missing joints stay NaN (Feedback's initial value).
        self.full: list[tuple[str, np.ndarray]] = []
        self.partial: list[tuple[str, list[tuple[int, int]]]] = []
        for name, role in FIELDS:
            pairs = []
            for j, jn in enumerate(joints):
                ch = profile.joint_channel(jn, role)  # type: ignore[arg-type]
                if ch is not None and not ch.is_output:
                    pairs.append((j, index[ch.name]))
            if len(pairs) == self.n_joints:
                self.full.append((name, np.array([i for _, i in pairs], dtype=np.intp)))
            elif pairs:
                self.partial.append((name, pairs))
        outputs = profile.outputs
        jindex = {jn: k for k, jn in enumerate(joints)}
        #: For each output channel, the joint whose valve it is.
        self.joint_of_output = np.array([jindex[str(c.joint)] for c in outputs], dtype=np.intp)
        #: For each joint, its valve's output channel index.
        self.output_of_joint = np.zeros(self.n_joints, dtype=np.intp)
        for o, j in enumerate(self.joint_of_output):
            self.output_of_joint[j] = o
        self.null_volts = np.array([c.null_volts for c in outputs])

    def new_feedback(self) -> Feedback:
        return Feedback(self.n_joints)

    def fill(self, eng: np.ndarray, fb: Feedback, t: float) -> None:
        """Copy this cycle's scaled inputs (profile input order) into `fb`, in place."""
        fb.t = t
        for name, idx in self.full:
            np.take(eng, idx, out=getattr(fb, name))
        for name, pairs in self.partial:
            arr = getattr(fb, name)
            for j, i in pairs:
                arr[j] = eng[i]

    def to_channels(self, joint_volts: np.ndarray, out: np.ndarray) -> None:
        """Per-joint valve voltages → per-output-channel voltages (profile order)."""
        np.take(joint_volts, self.joint_of_output, out=out)
