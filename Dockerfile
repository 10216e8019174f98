# The `dtrain` image that `dtrain launch --emit=k8s` and `--emit=tfjob` assume (docs/DEPLOY.md):
# dtrain on the PATH and the Fashion-MNIST dataset at its default place, built from Debian
# packages only.
#
#   docker build -t dtrain:latest .        (then push it where your cluster pulls from, and set
#                                           `image:` in the spec)
#
# Two stages: the build one has the compiler and -dev packages; the runtime one only the shared
# libraries dtrain loads (OpenBLAS, jansson, libyaml, zlib, libsodium, OpenSSL's libcrypto, the
# image decoders, HDF5, libarchive) and the dataset.
FROM debian:bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc make pkg-config libc6-dev libopenblas-dev \
      zlib1g-dev libjansson-dev libyaml-dev libsodium-dev libssl-dev libjpeg62-turbo-dev libpng-dev libgif-dev \
      libhdf5-dev libarchive-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY include/ include/
COPY src/ src/
COPY scripts/ scripts/
# scripts/install-deps.sh is skipped: the packages above are what it would install for a build.
RUN mkdir -p build && touch build/.deps-installed && make -j"$(nproc)" build/dtrain

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libopenblas0-pthread libjansson4 libyaml-0-2 zlib1g \
      libsodium23 libssl3 libjpeg62-turbo libpng16-16 libgif7 libhdf5-103-1 libarchive13 \
      dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 1000 --create-home dtrain
COPY --from=build /src/build/dtrain /usr/local/bin/dtrain
USER dtrain
# TF_CONFIG, OUTPUT_DIR and the command line come from the manifests.
EXPOSE 2222
ENTRYPOINT ["dtrain"]
CMD ["--help"]
