"""The price catalog over REST: anyone signed in reads the prices in force, their history and quotes;
operators set a pool's price and upload price files."""

import datetime as dt

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from billing_app.api.serializers import (
    PoolPriceSerializer,
    PriceHistoryQuerySerializer,
    PriceHistorySerializer,
    PriceUploadSerializer,
    QuoteQuerySerializer,
    QuoteSerializer,
    SetPoolPriceSerializer,
    SetSharePremiumSerializer,
    SharePremiumSerializer,
    SpotFeedSerializer,
)
from billing_app.feeds import set_spot_feed, upload_prices
from billing_app.quotes import quote
from billing_app.selectors import price_histories, prices_in_force, share_premiums_in_force
from billing_app.services import set_pool_price, set_share_premium
from billing_app.spot_feeds import PriceUploadError
from portal.api.permissions import MaySetPrices
from scheduler_app.models import Pool


class PriceListView(APIView):
    """The price in force now of every priced pool, per whole GPU-hour in USD (decimal strings).
    Unpriced pools are left out."""

    @extend_schema(responses=PoolPriceSerializer(many=True), tags=["prices"])
    def get(self, request):
        return Response(PoolPriceSerializer(prices_in_force(), many=True).data)


class PriceHistoryView(APIView):
    """Each priced pool's price over the last `hours`: the price at the start, then every change."""

    @extend_schema(
        parameters=[PriceHistoryQuerySerializer], responses=PriceHistorySerializer(many=True), tags=["prices"]
    )
    def get(self, request):
        form = PriceHistoryQuerySerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        now = timezone.now()
        since = now - dt.timedelta(hours=form.validated_data["hours"])
        return Response(PriceHistorySerializer(price_histories(since, now), many=True).data)


class QuoteView(APIView):
    """On-demand against spot for a request shape on one GPU model: per hour, over the max duration,
    and spot's effective cost once the pool's expected reclaims are counted."""

    @extend_schema(parameters=[QuoteQuerySerializer], responses=QuoteSerializer, tags=["prices"])
    def get(self, request):
        form = QuoteQuerySerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        return Response(QuoteSerializer(quote(**form.validated_data)).data)


class PriceUploadView(APIView):
    """Operators upload a spot price file; every row is checked and nothing is written if any is bad
    (400 with one error per bad line under `file`)."""

    permission_classes = [MaySetPrices]
    parser_classes = [MultiPartParser]

    @extend_schema(
        request={"multipart/form-data": PriceUploadSerializer}, responses=PoolPriceSerializer(many=True)
    )
    def post(self, request):
        form = PriceUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        name = form.validated_data.get("pool")
        pool = get_object_or_404(Pool, name=name) if name else None
        try:
            text = form.validated_data["file"].read().decode("utf-8")
        except UnicodeDecodeError:
            raise serializers.ValidationError({"file": ["The file is not UTF-8 text."]}) from None
        try:
            rows = upload_prices(text, actor=request.user, pool=pool)
        except PriceUploadError as error:
            raise serializers.ValidationError({"file": error.errors}) from None
        return Response(PoolPriceSerializer(rows, many=True).data, status=201)


class PoolPriceView(APIView):
    """Operators price a pool from now (or a later effective_from); earlier prices stay in the history."""

    permission_classes = [MaySetPrices]

    @extend_schema(
        request=SetPoolPriceSerializer,
        responses=PoolPriceSerializer,
        parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, description="The pool's name.")],
        tags=["prices"],
    )
    def put(self, request, name):
        form = SetPoolPriceSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=name)
        price = set_pool_price(pool, actor=request.user, **form.validated_data)
        return Response(PoolPriceSerializer(price).data)


class SharePremiumView(APIView):
    """The premium or discount in force per slice size (anyone signed in); operators add one (POST)."""

    def get_permissions(self):
        return [MaySetPrices()] if self.request.method == "POST" else super().get_permissions()

    @extend_schema(responses=SharePremiumSerializer(many=True), tags=["prices"])
    def get(self, request):
        return Response(SharePremiumSerializer(share_premiums_in_force(), many=True).data)

    @extend_schema(request=SetSharePremiumSerializer, responses=SharePremiumSerializer, tags=["prices"])
    def post(self, request):
        form = SetSharePremiumSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        row = set_share_premium(actor=request.user, **form.validated_data)
        return Response(SharePremiumSerializer(row).data, status=201)


class SpotFeedView(APIView):
    """Operators choose what drives a spot pool's price: occupancy (with bounds), replay, or upload."""

    permission_classes = [MaySetPrices]

    @extend_schema(request=SpotFeedSerializer, responses=SpotFeedSerializer, tags=["prices"])
    def put(self, request, name):
        form = SpotFeedSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=name)
        values = dict(form.validated_data)
        if "replay_series" in values:
            values["replay_series_key"] = values.pop("replay_series")
        return Response(SpotFeedSerializer(set_spot_feed(pool, actor=request.user, **values)).data)
