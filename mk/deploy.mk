# Deployment checks: the manifests in deploy/manifests and the Helm chart in
# deploy/charts, decoded strictly into the Kubernetes API types and rendered
# with helm's own library. A nested module (deploy/go.mod) keeps helm's
# dependencies out of the main module.
TEST_EXTRA += test-deploy

.PHONY: test-deploy
## test-deploy: check the Kubernetes manifests and the Helm chart.
test-deploy:
	cd deploy && $(GO) vet ./... && $(GO) test -count=1 ./...
