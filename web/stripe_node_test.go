package web

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// stripeNodeDir holds the stripe-node checkout and its package.json and
// lockfile; .ci/run installs its modules (npm ci). Without them, or
// without node, the test skips locally and fails in CI.
const stripeNodeDir = "testdata/stripe-node"

func TestStripeSandboxWithStripeNode(t *testing.T) {
	waitsOnRealClocks(t)
	node := stripeNode(t)
	checkoutUnderEveryFault(t, func(ctx context.Context, url, order, key string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, node, "checkout.cjs", url, order, key, "pm_card_visa")
		cmd.Dir = stripeNodeDir
		return cmd
	})
}

// The same checkout in two steps, create then confirm
// (stripe.paymentIntents.confirm), under every fault switch.
func TestStripeSandboxCreateThenConfirmWithStripeNode(t *testing.T) {
	waitsOnRealClocks(t)
	node := stripeNode(t)
	checkoutUnderEveryFault(t, func(ctx context.Context, url, order, key string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, node, "checkout.cjs", url, order, key, "pm_card_visa", "later")
		cmd.Dir = stripeNodeDir
		return cmd
	})
}

// stripeNode is node, with stripe-node installed beside the checkout.
func stripeNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(stripeNodeDir, "node_modules", "stripe", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node or stripe-node is missing (npm ci in web/%s): %v", stripeNodeDir, err)
		}
		t.Skipf("node or stripe-node is missing (npm ci in web/%s): %v", stripeNodeDir, err)
	}
	return node
}
