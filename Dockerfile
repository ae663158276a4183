# firedrill controller + agent image (Debian 12, CPU only).
#   docker build -t firedrill:dev .
#   docker compose up        # controller + 4 agents, see docker-compose.yml
FROM debian:12

# Packages first, from the same list a developer machine uses, so this layer
# is rebuilt only when bootstrap.sh changes.
COPY scripts/bootstrap.sh /src/scripts/bootstrap.sh
RUN /src/scripts/bootstrap.sh && rm -rf /var/lib/apt/lists/*

# Only what the build reads (tests and benchmarks are off), so local build-*
# folders and .git never enter the build context's layers. A new top-level
# source folder must be added here.
WORKDIR /src
COPY CMakeLists.txt CMakePresets.json ./
COPY proto/ proto/
COPY common/ common/
COPY faults/ faults/
COPY agent/ agent/
COPY controller/ controller/
COPY cli/ cli/
COPY scenarios/ scenarios/
COPY runbooks/ runbooks/
COPY data/ data/

# The binaries fall back to <exe>/../share/firedrill/scenarios once the source
# tree (baked in at build time) is gone; FIREDRILL_SCENARIOS says it outright.
RUN cmake -S . -B /tmp/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFIREDRILL_BUILD_TESTS=OFF \
 && cmake --build /tmp/build \
 && install -m 0755 -t /usr/local/bin \
      /tmp/build/bin/firedrill-controller /tmp/build/bin/firedrill-agent /tmp/build/bin/firedrill \
 && mkdir -p /usr/local/share/firedrill \
 && cp -r scenarios runbooks data /usr/local/share/firedrill/ \
 && rm -rf /tmp/build /src

ENV FIREDRILL_SCENARIOS=/usr/local/share/firedrill/scenarios \
    FIREDRILL_DATA=/usr/local/share/firedrill/data

# Not root: nothing here needs it. The state dir is created owned by this
# user so a fresh named volume mounted there inherits the ownership.
RUN useradd --system --create-home --home-dir /home/firedrill firedrill \
 && mkdir -p /var/lib/firedrill && chown firedrill:firedrill /var/lib/firedrill
USER firedrill
WORKDIR /home/firedrill
VOLUME /var/lib/firedrill

EXPOSE 50071
ENTRYPOINT ["firedrill-controller"]
CMD ["--listen", "0.0.0.0:50071", "--state-dir", "/var/lib/firedrill"]
