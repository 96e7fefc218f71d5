package fault

import (
	"os"
	"testing"

	"github.com/raftmq/raftmq/e2e"
)

func TestMain(m *testing.M) { os.Exit(e2e.RunExclusive(m)) }
