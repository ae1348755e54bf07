"""A module for reward_model.model.external_lib: the reward-model worker imports it before loading the model
(where a user's module would register custom model classes); the test sees it in the worker's sys.modules."""

IMPORTED_BY_THE_REWARD_MODEL_WORKER = True
