"""Private hyperparameter optimization methods, one module each, sharing `common.MethodResult`."""
