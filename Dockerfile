# Image for bin/drascope-scheduler. Build the binary first: make build
# links it statically (CGO_ENABLED=0, -trimpath), as distroless/static needs;
# TestBinariesAreStatic checks that it is.
FROM gcr.io/distroless/static:nonroot
COPY bin/drascope-scheduler /drascope-scheduler
USER 65532:65532
ENTRYPOINT ["/drascope-scheduler"]
