"""Running jobs on this machine without SageMaker: the /opt/ml tree and process mode."""
