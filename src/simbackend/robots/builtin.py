"""The built-in robots: the toy ``quadruped``, Unitree ``go1`` (and ``go1_dc``) and Unitree ``g1``.

Go1 and G1 are MuJoCo Menagerie's models (BSD-3-Clause, LICENSE beside each
file under ``models/assets/robots/``), collision geometry only, with the
actuator gains mjlab derives from the motors' data (Go1). G1's policy drives
its twelve leg joints; the waist and arms are held at the default pose by
their servos. G1's servo gains are three times those of Unitree's own G1
training recipe (kd by the square root): a humanoid standing by PD alone
falls over with mjlab's motor-derived gains and with Unitree's (measured: on
MuJoCo it topples backwards within 1.5 s), and holds its ``knees_bent`` pose
for 10 s with these (a test, on every engine).
"""

from __future__ import annotations

from simbackend.models.builtin import ASSETS

from .description import RobotDescription
from .registry import register_robot

_ROBOTS = ASSETS / "robots"
_LEGS = ("FR", "FL", "RR", "RL")

QUADRUPED = register_robot(
    RobotDescription(
        name="quadruped",
        model="quadruped",
        joints=tuple(f"{leg}_{part}" for leg in ("FL", "FR", "RL", "RR") for part in ("hip", "thigh", "calf")),
        default_pose="stand",
        base_body="torso",
        feet=("FL_calf_link", "FR_calf_link", "RL_calf_link", "RR_calf_link"),
        actuation="pd",
        kp=40.0,
        kd=1.0,
        imu_site="imu",
        add_floor=False,  # the model has its floor
        timestep=0.002,
    )
)

GO1 = register_robot(
    RobotDescription(
        name="go1",
        model=str(_ROBOTS / "unitree_go1" / "go1.xml"),
        joints=tuple(f"{leg}_{part}_joint" for leg in _LEGS for part in ("hip", "thigh", "calf")),
        default_pose="home",
        base_body="trunk",
        feet=tuple(f"{leg}_foot_collision" for leg in _LEGS),
        termination_bodies=("trunk",),
        imu_site="imu",
        self_collisions=True,  # Menagerie's own filtering, kept: its scene (and trained policies) as before
    )
)

GO1_DC = register_robot(
    RobotDescription(
        name="go1_dc",
        model=str(_ROBOTS / "unitree_go1" / "go1_motors.xml"),
        joints=GO1.joints,
        default_pose="home",
        base_body="trunk",
        feet=GO1.feet,
        termination_bodies=("trunk",),
        imu_site="imu",
        actuation="pd",
        kp={"*_hip_joint": 15.8952427, "*_thigh_joint": 15.8952427, "*_calf_joint": 35.764296},
        kd={"*_hip_joint": 1.01192258, "*_thigh_joint": 1.01192258, "*_calf_joint": 2.2768258},
        saturation_effort={"*_hip_joint": 23.7, "*_thigh_joint": 23.7, "*_calf_joint": 35.55},
        velocity_limit={"*_hip_joint": 30.1, "*_thigh_joint": 30.1, "*_calf_joint": 20.06},
        self_collisions=True,  # as go1
    )
)
"""Go1 on DC motors: ``go1`` with its servos replaced by a PD law at the physics rate on torque motors
(``go1_motors.xml``, ctrl limited to the motors' torque), the same gains as ``go1``'s servos (kp 15.895 and
kd 1.0119 on hips and thighs, 35.764 and 2.2768 on calves) and Unitree's motor limits as a DC-motor
torque-speed curve: hips and thighs 23.7 N m stall torque and 30.1 rad/s no-load speed, calves 35.55 N m
and 20.06 rad/s (mjlab's ``HIP_ACTUATOR`` / ``KNEE_ACTUATOR`` in
``mujocolab/mjlab: src/mjlab/asset_zoo/robots/unitree_go1/go1_constants.py``). No joint is driven faster
than its motor's no-load speed, on any engine: the controller computes the torque."""

_G1_LEGS = tuple(
    f"{side}_{part}_joint"
    for side in ("left", "right")
    for part in ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
)
_G1_HELD = ("waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint") + tuple(
    f"{side}_{part}_joint"
    for side in ("left", "right")
    for part in ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch", "wrist_yaw")
)

G1 = register_robot(
    RobotDescription(
        name="g1",
        model=str(_ROBOTS / "unitree_g1" / "g1.xml"),
        joints=_G1_LEGS,
        held_joints=_G1_HELD,
        default_pose="knees_bent",
        base_body="pelvis",
        feet=("left_ankle_roll_link", "right_ankle_roll_link"),
        termination_bodies=("pelvis", "torso_link"),
        imu_site="imu_in_pelvis",
        kp={
            "*_hip_*": 300.0,
            "*_knee_joint": 450.0,
            "*_ankle_*": 450.0,
            "waist_*": 600.0,
            "*_shoulder_*": 120.0,
            "*_elbow_joint": 120.0,
            "*_wrist_*": 60.0,
        },  # fmt: skip
        kd={
            "*_hip_*": 3.5,
            "*_knee_joint": 7.0,
            "*_ankle_*": 7.0,
            "waist_*": 8.7,
            "*_shoulder_*": 1.7,
            "*_elbow_joint": 1.7,
            "*_wrist_*": 0.9,
        },  # fmt: skip
        engine_options={"mjwarp": {"njmax": 512, "nconmax": 128}},
        self_collisions=True,  # Menagerie's own filtering (its four <exclude> pairs), kept as before
    )
)
