"""YAML job configs: the schema (schema.py) and its YAML binding (yaml_binding.py: load, validate, report
errors with file:line:column). Every room imports what it needs from here (docs/CONFIG.md).
"""
from .schema import (MAX_SIZE, REQUIRED, SERVICE_IGNORES, BalancerConfig, DemoConfig, DemoDatasetConfig,
                     DemoLLMConfig, JobConfig, JobSection, NumaConfig, PoolSection, RawMapping, ReportConfig,
                     RoutingConfig, ServiceConfig, Size, as_dict, defaults_of, one_of, parse_size)
from .yaml_binding import (Locator, check_positive, fail, load_config, load_pool_section, load_sections,
                           load_service_config, parse_section, validate_pool)

__all__ = ["MAX_SIZE", "REQUIRED", "SERVICE_IGNORES", "BalancerConfig", "DemoConfig", "DemoDatasetConfig",
           "DemoLLMConfig", "JobConfig", "JobSection", "NumaConfig", "PoolSection", "RawMapping", "ReportConfig",
           "RoutingConfig", "ServiceConfig", "Size", "as_dict", "defaults_of", "one_of", "parse_size", "Locator",
           "check_positive", "fail", "load_config", "load_pool_section", "load_sections", "load_service_config",
           "parse_section", "validate_pool"]
