# syntax=docker/dockerfile:1
# The errand image: one statically linked `errand` binary on an empty base, run as a non-root
# user. The controller runs it (`errand controller`), and every execution's pod copies the
# binary into the agent's container (`errand stage`), which is why it must be static: it runs
# in whatever image the agent brings.
#
#   docker build -t errand:dev .        (or podman / buildah / kaniko: any BuildKit-style build)
#
# The test environment, which has no registry and no container daemon, builds the same image
# as an OCI archive with hack/images/errand-image.sh.
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# glibc with +crt-static: no musl toolchain is needed. --target keeps the flag off build
# scripts and proc macros, which must stay dynamic.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$target" --bin errand \
 && cp "target/$target/release/errand" /errand \
 && strip /errand \
 && if readelf -l /errand | grep -q INTERP; then echo "errand is not static" >&2; exit 1; fi \
 && mkdir -m 1777 /scratch-tmp

FROM scratch
# CA roots for the object stores (S3, GCS, Azure); the API server's CA comes with the pod's
# service account.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /scratch-tmp /tmp
COPY --from=build /errand /usr/local/bin/errand
# 65532: the conventional "nonroot" user, also the default user of execution pods.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/errand"]
