"""Operations: the shipped Grafana dashboard and Prometheus rules against a real
Prometheus scraping a broker, and the metrics page against what brokers expose."""
