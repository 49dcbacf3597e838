# The gateway's container image: the static binaries on nothing (FROM
# scratch needs no registry to build from), a CA bundle, a non-root user,
# and the two directories the gateway may write.
#
# Build it with `deploy/build-image.sh TAG`, which stages the context this
# file reads (the binaries built with CGO_ENABLED=0, /etc/passwd, the CA
# bundle, the directories with their modes) and runs podman or docker: the
# repository's root is not the context.
#
# Every flag of mcpp-gateway is also MCPP_<FLAG> in the environment (upper
# case, "-" as "_"; the command line wins), so `docker run -e
# MCPP_MAX_PODS=5000 IMAGE` and `docker run IMAGE --max-pods 5000` are the
# same. The image sets two of them:
#   MCPP_LISTEN=0.0.0.0:8080   reachable from outside the container
#                              (the gateway's own default is 127.0.0.1)
#   MCPP_HISTORY_DIR=/data     the history on the volume, so that it
#                              survives a restart of the container
FROM scratch
ARG VERSION=devel
LABEL org.opencontainers.image.title="mcpp-gateway" \
      org.opencontainers.image.description="The MCPP pod gateway" \
      org.opencontainers.image.version="$VERSION"

# /usr/local/bin/mcpp-gateway, /usr/local/bin/mcpp, /etc/passwd,
# /etc/group, /etc/ssl/certs/ca-certificates.crt, /tmp (1777: the history's
# temporary directory when MCPP_HISTORY_DIR is emptied).
COPY rootfs/ /
# /data, the history (--history-dir): the user's own, 0700.
COPY --chown=65532:65532 owned/ /

USER 65532:65532
ENV PATH=/usr/local/bin \
    MCPP_LISTEN=0.0.0.0:8080 \
    MCPP_HISTORY_DIR=/data
EXPOSE 8080
VOLUME /data
ENTRYPOINT ["/usr/local/bin/mcpp-gateway"]
