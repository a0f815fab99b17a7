package integration

import (
	"fmt"
	"os"
)

// schedulerConfigWithKubeconfig writes a copy of a KubeSchedulerConfiguration
// file that differs only in clientConnection.kubeconfig (the shipped config
// relies on the in-cluster config of its Deployment).
func schedulerConfigWithKubeconfig(src, name, kubeconfig string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	return writeTempConfig(name, string(data), kubeconfig)
}

func writeTempConfig(name, config, kubeconfig string) (string, error) {
	path := env.cp.Dir + "/" + name + ".yaml"
	content := config + fmt.Sprintf("\nclientConnection:\n  kubeconfig: %s\n", kubeconfig)
	return path, os.WriteFile(path, []byte(content), 0o600)
}
