#!/usr/bin/env python3
"""Builds a single-layer OCI image archive from a directory and/or single files
(such as a static binary), and optionally imports it into containerd.

No registry is reachable from the test machines, so the images the test
environment runs (the pod sandbox "pause" image, a busybox test image, the
errand image) are built here and imported with `ctr images import`. The
archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...)
with one gzipped layer; the index carries both `io.containerd.image.name`
(the full reference containerd tags the import with) and
`org.opencontainers.image.ref.name`. Output is reproducible: entries are
sorted, owners default to root, and every timestamp is SOURCE_DATE_EPOCH
(default 0). Only the Python standard library is used.

Examples:
  oci-image.py --name errand.local/busybox:test --rootfs ./rootfs \\
      --cmd '["sh"]' -o busybox.tar
  oci-image.py --name errand.local/errand:dev \\
      --add target/x86_64-unknown-linux-musl/release/errand:/errand:0755 \\
      --entrypoint /errand --user 65532:65532 -o errand.tar \\
      --import --address /var/tmp/errand-testenv/containerd/containerd.sock
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class HashingWriter(io.RawIOBase):
    """Passes writes through to `inner` while counting and hashing them."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self):
        return True

    def write(self, data):
        self.sha.update(data)
        self.size += len(data)
        self.inner.write(data)
        return len(data)

    def digest(self):
        return "sha256:" + self.sha.hexdigest()


def parse_add(spec):
    """SRC:DEST[:MODE] -> (src, dest, mode or None)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        raise argparse.ArgumentTypeError(f"--add wants SRC:/DEST[:MODE], got {spec!r}")
    mode = int(parts[2], 8) if len(parts) == 3 else None
    return parts[0], parts[1], mode


def parse_argv(spec):
    """A JSON array of strings, or one plain word."""
    if spec.startswith("["):
        argv = json.loads(spec)
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise argparse.ArgumentTypeError(f"want a JSON array of strings, got {spec!r}")
        return argv
    return [spec]


def parse_owner(spec):
    uid, _, gid = spec.partition(":")
    return int(uid), int(gid or uid)


class LayerWriter:
    """Writes a reproducible tar layer; remembers directories already added."""

    def __init__(self, tar, mtime, owner):
        self.tar = tar
        self.mtime = mtime
        self.uid, self.gid = owner
        self.dirs = set()

    def _info(self, name, kind, mode):
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = mode
        info.mtime = self.mtime
        info.uid, info.gid = self.uid, self.gid
        info.uname = info.gname = ""
        return info

    def parents(self, name):
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.directory("/".join(parts[:i]), 0o755)

    def directory(self, name, mode):
        if name in self.dirs:
            return
        self.parents(name)
        self.dirs.add(name)
        self.tar.addfile(self._info(name, tarfile.DIRTYPE, mode))

    def file(self, name, path, mode):
        self.parents(name)
        info = self._info(name, tarfile.REGTYPE, mode)
        info.size = os.path.getsize(path)
        with open(path, "rb") as f:
            self.tar.addfile(info, f)

    def symlink(self, name, target):
        self.parents(name)
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self.tar.addfile(info)

    def tree(self, root):
        """Adds everything under `root` (the image's /), sorted, symlinks kept."""
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir != ".":
                self.directory(rel_dir, stat.S_IMODE(os.lstat(dirpath).st_mode))
            entries = sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))])
            for entry in entries:
                path = os.path.join(dirpath, entry)
                name = entry if rel_dir == "." else f"{rel_dir}/{entry}"
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    self.symlink(name, os.readlink(path))
                elif stat.S_ISREG(st.st_mode):
                    self.file(name, path, stat.S_IMODE(st.st_mode))
                else:
                    raise SystemExit(f"oci-image: unsupported file type: {path}")


def write_layer(args, blobs_dir):
    """Writes the gzipped layer blob; returns (diff_id, digest, size)."""
    tmp = tempfile.NamedTemporaryFile(dir=blobs_dir, delete=False)
    with tmp:
        compressed = HashingWriter(tmp)
        with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0) as gz:
            uncompressed = HashingWriter(gz)
            with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                layer = LayerWriter(tar, args.mtime, parse_owner(args.owner))
                if args.rootfs:
                    layer.tree(args.rootfs)
                for src, dest, mode in args.add:
                    if mode is None:
                        mode = stat.S_IMODE(os.stat(src).st_mode)
                    layer.file(dest.lstrip("/"), src, mode)
                for dest in args.mkdir:
                    layer.directory(dest.strip("/"), 0o1777 if dest.rstrip("/") == "/tmp" else 0o755)
    os.rename(tmp.name, os.path.join(blobs_dir, compressed.sha.hexdigest()))
    return uncompressed.digest(), compressed.digest(), compressed.size


def write_blob(blobs_dir, obj):
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs_dir, digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def build(args):
    arch = args.arch or ARCHES.get(platform.machine(), platform.machine())
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.mtime))
    with tempfile.TemporaryDirectory() as layout:
        blobs = os.path.join(layout, "blobs", "sha256")
        os.makedirs(blobs)
        diff_id, layer_digest, layer_size = write_layer(args, blobs)
        image_config = {"Env": args.env or ["PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
        for key, value in (("Entrypoint", args.entrypoint), ("Cmd", args.cmd),
                           ("User", args.user), ("WorkingDir", args.workdir)):
            if value:
                image_config[key] = value
        if args.label:
            image_config["Labels"] = dict(label.split("=", 1) for label in args.label)
        config_digest, config_size = write_blob(blobs, {
            "created": created,
            "architecture": arch,
            "os": "linux",
            "config": image_config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": created, "created_by": "hack/images/oci-image.py"}],
        })
        manifest_digest, manifest_size = write_blob(blobs, {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": layer_size}],
        })
        tag = args.name.rsplit(":", 1)[1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
        with open(os.path.join(layout, "index.json"), "w") as f:
            json.dump({
                "schemaVersion": 2,
                "mediaType": MEDIA_INDEX,
                "manifests": [{
                    "mediaType": MEDIA_MANIFEST,
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": args.name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }],
            }, f, sort_keys=True)
        with open(os.path.join(layout, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        out_tmp = args.output + ".tmp"
        with tarfile.open(out_tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for rel in ["oci-layout", "index.json", "blobs", "blobs/sha256"] + [
                    f"blobs/sha256/{b}" for b in sorted(os.listdir(blobs))]:
                info = tar.gettarinfo(os.path.join(layout, rel), rel)
                info.mtime, info.uid, info.gid, info.uname, info.gname = args.mtime, 0, 0, "", ""
                info.mode = 0o644 if info.isfile() else 0o755
                if info.isfile():
                    with open(os.path.join(layout, rel), "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
        os.replace(out_tmp, args.output)
    print(f"{args.name} {manifest_digest} -> {args.output}", file=sys.stderr)


def import_archive(args):
    ctr = shutil.which("ctr")
    if not ctr:
        raise SystemExit("oci-image: ctr not found (Debian package containerd)")
    cmd = [ctr]
    if args.address:
        cmd += ["--address", args.address]
    cmd += ["--namespace", args.namespace, "images", "import", args.output]
    subprocess.run(cmd, check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--name", required=True, help="image reference, e.g. errand.local/busybox:test")
    parser.add_argument("-o", "--output", required=True, help="OCI archive to write")
    parser.add_argument("--rootfs", help="directory that becomes the image's /")
    parser.add_argument("--add", type=parse_add, action="append", default=[],
                        metavar="SRC:/DEST[:MODE]", help="add one file (repeatable)")
    parser.add_argument("--mkdir", action="append", default=[], metavar="/DIR",
                        help="add an empty directory (/tmp gets mode 1777)")
    parser.add_argument("--owner", default="0:0", help="uid:gid owning every entry (default 0:0)")
    parser.add_argument("--entrypoint", type=parse_argv, help='image entrypoint: a JSON array or one word')
    parser.add_argument("--cmd", type=parse_argv, help='default arguments: a JSON array or one word')
    parser.add_argument("--user", help="user the container runs as, e.g. 65532:65532")
    parser.add_argument("--workdir", help="working directory")
    parser.add_argument("--env", action="append", help="KEY=VALUE (repeatable; default sets PATH)")
    parser.add_argument("--label", action="append", help="KEY=VALUE (repeatable)")
    parser.add_argument("--arch", help="image architecture (default: this machine's)")
    parser.add_argument("--import", dest="do_import", action="store_true",
                        help="import the archive with `ctr images import` afterwards")
    parser.add_argument("--address", help="containerd socket for --import")
    parser.add_argument("--namespace", default="k8s.io", help="containerd namespace (default k8s.io)")
    args = parser.parse_args()
    if not args.rootfs and not args.add:
        parser.error("give --rootfs and/or --add")
    args.mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    build(args)
    if args.do_import:
        import_archive(args)


if __name__ == "__main__":
    main()
