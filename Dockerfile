# Image for bin/drascope-scheduler. Build the binary first, statically:
#   CGO_ENABLED=0 make build
FROM gcr.io/distroless/static:nonroot
COPY bin/drascope-scheduler /drascope-scheduler
USER 65532:65532
ENTRYPOINT ["/drascope-scheduler"]
