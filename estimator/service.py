"""`rig-estimator`: the online estimator as its own process (`python -m estimator.service`).

    rig-estimator --profile PATH [--telemetry EP] [--publish EP] [--param-file PATH]
                  [--duration S] [--no-resume] [--key NAME] [--connect-timeout S] [-v]

Exit codes: 0 done (parameter file written if any row was used), 2 bad profile, 3 cannot
subscribe or publish (CURVE key missing or not listed, `--publish` beyond loopback without
CURVE, address in use, no telemetry within --connect-timeout): nothing is written then.
Sockets and CURVE: `estimator.transport`.

Subscribes to daq telemetry (it only ever reads; daq never waits for it), restarts its filters
on a sequence gap (and counts it), runs conditioning → regressors → RLS, publishes
`b"estimate"` messages on its own PUB socket at `[estimator] publish_hz`, and on exit
(SIGTERM, SIGINT, --duration) writes the parameter file. SIGUSR1 resets the estimate to its
prior, SIGUSR2 toggles freeze. Restarted with the parameter file present (and resume on), it
starts from that file's estimate with its covariance inflated ×100 (`RESUME_INFLATION`): the
old estimate is a starting point worth ~1 % of the samples it came from.
"""

from __future__ import annotations

import argparse
import logging
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np
import zmq

from daq.profile.loader import ProfileError, load_profile
from daq.profile.schema import Estimator as EstimatorCfg
from daq.profile.schema import Profile
from daq.telemetry.wire import Event, Meta, SampleBatch
from estimator.blas import limit_blas_threads
from estimator.models_lin import lin_plant
from estimator.online import Estimate, OnlineIdentifier
from estimator.paramfile import read_param_file, write_param_file
from estimator.structure import Structure, describe, read_structure
from estimator.transport import DEFAULT_KEY, TransportError, await_meta, open_sockets

log = logging.getLogger(__name__)
RESUME_INFLATION = 100.0
#: Telemetry messages queued for the estimator (20 rows each: 400 s at 1 kHz) before ZeroMQ
#: drops: a busy estimator catches up instead of losing data; daq never waits either way.
TELEMETRY_QUEUE = 20_000
SCHEMA_VERSION = 1


def estimate_message(rig: str, seq: int, est: Estimate, last_seq: int) -> list[bytes]:
    head: dict[str, Any] = {
        "v": SCHEMA_VERSION,
        "rig": rig,
        "seq": seq,
        "t": est.t,
        "data_seq": last_seq,
        "names": est.names,
        "theta": est.theta.tolist(),
        "sigma_pct": [float(x) for x in est.sigma_pct],
        "cov": est.cov.tolist(),
        "samples": est.samples,
        "gaps": est.gaps,
        "models": est.models,
    }
    return [b"estimate", msgpack.packb(head, use_bin_type=True)]


def prior_from_file(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    data = read_param_file(path)
    prior = {}
    for name, m in data.get("models", {}).items():
        theta = np.asarray(m["theta"], dtype=float)
        rv = float(m["residual_var"])
        cov = np.asarray(m["cov_diag"], dtype=float)
        if not (np.all(np.isfinite(theta)) and np.all(cov > 0) and rv > 0):
            log.warning("%s: model %s not usable as a prior; starting diffuse", path, name)
            continue
        prior[name] = (theta, cov / rv * RESUME_INFLATION)
    return prior


if TYPE_CHECKING:
    from estimator.chain_online import ChainOnlineIdentifier

    Identifier = OnlineIdentifier | ChainOnlineIdentifier


def identifier(
    profile: Profile, columns: Any, prior: Any, structure: Structure | None
) -> Identifier:
    """The online estimator of the profile's kind of machine: a `[chain]`'s base parameters
    (estimator.chain_online), else the planar rigs' model families."""
    if profile.chain is not None:
        # Imported here: a planar rig's estimator need not load the chain's modules.
        from estimator.chain_online import ChainOnlineIdentifier

        return ChainOnlineIdentifier(profile, columns)
    return OnlineIdentifier(profile, columns, prior=prior, structure=structure)


def write_estimate(path: Path, rig: str, ident: Identifier) -> None:
    if not isinstance(ident, OnlineIdentifier):  # a chain's (estimator.chain_online)
        from estimator.chain_online import MODEL

        est = ident.estimate()
        models = {
            MODEL: {
                "names": est.names,
                "theta": est.theta.tolist(),
                "sigma_pct": [float(x) for x in est.sigma_pct],
                "cov_diag": np.diag(est.cov).tolist(),
                "residual_var": est.models[MODEL]["residual_var"],
            }
        }
        write_param_file(path, rig, est.samples, models, None, warnings=est.warnings)
        log.info("wrote %s (%d equations)", path, est.samples)
        return
    models = {}
    ths = {}
    for c in ident.chains:
        th = c.theta()
        ths[c.model.name] = th
        models[c.model.name] = {
            "names": list(c.model.names),
            "theta": th.tolist(),
            "sigma_pct": [float(x) for x in c.sigma_pct()],
            "cov_diag": np.diag(c.covariance()).tolist(),
            "residual_var": c.rls.residual_variance(),
        }
    params = None
    if "mechanical" in ths and "fluid" in ths:
        params = ident.params.with_identified(ths["mechanical"], ths["fluid"])
    else:
        # The real-rig family maps onto the shared physics too (its effects are not part of
        # a [plant] table: the controller's feed-forward uses the reference terms).
        names = [nm for c in ident.chains for nm in c.model.names]
        plant = lin_plant(ident.params, names, np.concatenate(list(ths.values())))
        params = None if plant is None else plant[0]
    samples = min((c.rls.samples for c in ident.chains), default=0)
    write_param_file(path, rig, samples, models, params, warnings=ident.warnings)
    log.info("wrote %s (%d samples)", path, samples)


class _Flags:
    stop = False
    reset = False
    freeze = False


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rig-estimator", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--telemetry", help="daq telemetry endpoint (default: profile network)")
    ap.add_argument("--publish", help="estimates PUB endpoint (default: network.estimates)")
    ap.add_argument("--param-file", help="parameter file (default: [estimator] param_file)")
    ap.add_argument("--duration", type=float, default=0.0, help="stop after S seconds (0 = run)")
    ap.add_argument("--no-resume", action="store_true", help="ignore an existing param file")
    ap.add_argument(
        "--structure",
        help="parameter file whose [structure] (the Coulomb band, valve null offsets and laps a "
        "batch chose: `rigctl identify` writes batch-params.toml) the models run, in place of "
        "the profile's [estimator] keys",
    )
    ap.add_argument(
        "--key",
        help=f"CURVE client key NAME in network.keys_dir (default '{DEFAULT_KEY}'; CURVE only)",
    )
    ap.add_argument(
        "--connect-timeout",
        type=float,
        default=30.0,
        help="exit 3 if no telemetry arrives within S seconds (default 30; 0 = wait forever)",
    )
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    try:  # the refits and fits in this process: estimator.blas says why
        limit_blas_threads()
    except ValueError as e:
        ap.error(str(e))
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        profile = load_profile(args.profile)
    except ProfileError as exc:
        log.error("%s", exc)
        return 2
    if profile.realtime.cpu >= 0:
        # Off the loop's CPU however it was started (the unit says CPUAffinity=0, but
        # `rigctl identify` and a start by hand did not): on the loop's CPU its work delays the
        # loop's wake-ups (bench/estimator_kill_overruns.py, docs/estimator.md).
        from daq.loop.realtime import keep_off_cpu

        keep_off_cpu(profile.realtime.cpu)
    cfg = profile.estimator or EstimatorCfg()
    param_path = Path(args.param_file or cfg.param_file)
    prior = None
    if profile.chain is not None:
        if args.structure:
            log.error("rig-estimator: --structure: a [chain] machine's model has no structure")
            return 2
        log.info("a [chain] machine: its base parameters, restarted (estimator.chain_online)")
    elif cfg.resume and not args.no_resume and param_path.exists():
        try:
            prior = prior_from_file(param_path)
            log.info("resuming from %s", param_path)
        except ValueError as exc:
            log.warning("%s; starting diffuse", exc)

    structure = None
    if args.structure:
        try:
            structure = read_structure(args.structure, len(profile.joints))
        except ValueError as exc:
            log.error("rig-estimator: %s", exc)
            return 2
    log.info("model structure: %s", describe(structure, cfg))

    flags = _Flags()

    def on_stop(*_: object) -> None:
        flags.stop = True

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, lambda *_: setattr(flags, "reset", True))
    signal.signal(signal.SIGUSR2, lambda *_: setattr(flags, "freeze", not flags.freeze))

    ctx = zmq.Context()
    try:  # CURVE and the loopback rule as in the service; loud, before anything is written
        sockets = open_sockets(
            profile.network,
            args.telemetry,
            args.publish,
            key=args.key,
            rcvhwm=TELEMETRY_QUEUE,
            ctx=ctx,
        )
    except TransportError as exc:
        log.error("rig-estimator: %s", exc)
        ctx.term()
        return 3
    sub, pub = sockets.sub, sockets.pub
    try:
        first = await_meta(sockets, args.connect_timeout, lambda: flags.stop)
    except TransportError as exc:
        log.error("rig-estimator: %s", exc)
        first = None
    if first is None:  # no telemetry: nothing to estimate, nothing written
        sockets.close()
        ctx.term()
        return 0 if flags.stop else 3
    ident: Identifier | None = identifier(profile, first.header["columns"], prior, structure)
    layout_id: Any = first.layout_id
    next_seq: int | None = None
    out_seq = 0
    period = 1.0 / cfg.publish_hz
    t_end = time.monotonic() + args.duration if args.duration > 0 else float("inf")
    next_pub = time.monotonic() + period
    try:
        while not flags.stop and time.monotonic() < t_end:
            msg = sub.recv(timeout=0.05)  # malformed messages are counted and skipped there
            if isinstance(msg, Meta) and (ident is None or msg.layout_id != layout_id):
                ident = identifier(profile, msg.header["columns"], prior, structure)
                layout_id, next_seq = msg.layout_id, None
                log.info("layout %s: %d columns", layout_id, len(msg.names))
            elif isinstance(msg, SampleBatch) and ident is not None and msg.layout_id == layout_id:
                if next_seq is not None and msg.seq0 != next_seq:
                    log.info("telemetry gap: expected seq %d, got %d", next_seq, msg.seq0)
                    ident.gap()
                ident.update_rows(msg.rows())
                next_seq = msg.seq0 + msg.n
            elif isinstance(msg, Event) and ident is not None:
                ident.event(msg.header)  # segments only the fluid models take
            if ident is not None:
                if flags.reset:
                    flags.reset = False
                    ident.reset()
                ident.freeze(flags.freeze)
                now = time.monotonic()
                if now >= next_pub:
                    next_pub = now + period
                    est = ident.estimate()
                    try:
                        pub.send_multipart(
                            estimate_message(profile.rig.id, out_seq, est, (next_seq or 0) - 1),
                            zmq.NOBLOCK,
                        )
                    except zmq.Again:
                        pass
                    out_seq += 1
    finally:
        if ident is not None:
            ident.flush()  # rows still in the chunk buffer count for the parameter file
        if ident is not None and ident.rows > 0:
            write_estimate(param_path, profile.rig.id, ident)
        sockets.close()
        ctx.term()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
