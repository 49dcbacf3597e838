package harness

// ImageUser is the container image's user and group (Dockerfile,
// deploy/build-image.sh): numeric, so that Kubernetes' runAsNonRoot can
// check it. The image's test checks the image runs as it; the Helm
// chart's tests check that the chart runs the gateway as it.
const ImageUser = 65532

// ImageEnv is the environment the container image sets, under the
// container's own: the image's test checks that the image has it, and the
// Helm chart's tests run the chart's pods with it.
var ImageEnv = []string{"MCPP_LISTEN=0.0.0.0:8080", "MCPP_HISTORY_DIR=/data"}
