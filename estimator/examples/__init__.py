"""Worked examples of user-written estimator models (`[estimator] model = "module:function"`)."""
